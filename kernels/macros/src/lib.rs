//! The `#[kernel]` attribute of the `kernels` crate.
//!
//! It plays the role of rust-cuda's `#[kernel]`: the annotated function becomes an
//! `extern "ptx-kernel"` entry point when the crate is compiled for `nvptx64-nvidia-cuda`, and a
//! plain Rust function when it is compiled for the host, where the CPU simulator runs it. On the
//! host it also gets a launch descriptor, a constant named after the function in upper case
//! (`saxpy` → `SAXPY`), that carries the PTX entry name and the argument tuple type, so the
//! host-side launcher is type-checked against the kernel's signature.

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::{FnArg, ItemFn, parse_macro_input, spanned::Spanned};

/// Declares a GPU kernel. See the crate documentation.
///
/// The function must be `pub unsafe fn`, return nothing, take only `Copy` arguments (scalars and
/// raw pointers to global memory) and have no generics.
///
/// `#[kernel(launch_bounds(MAX_THREADS, MIN_BLOCKS))]` is CUDA's `__launch_bounds__`: the builder
/// (`build.rs`, which reads it from the source) adds `.maxntid MAX_THREADS, 1, 1` and
/// `.minnctapersm MIN_BLOCKS` to the kernel's PTX entry, so that ptxas keeps the registers low
/// enough for `MIN_BLOCKS` blocks of `MAX_THREADS` threads per SM. Launches with more threads fail.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        if let Err(err) = check_launch_bounds(&attr) {
            return err.to_compile_error().into();
        }
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(func) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(func: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &func.sig;
    if sig.unsafety.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "a #[kernel] must be an `unsafe fn`: it dereferences raw device pointers",
        ));
    }
    if !sig.generics.params.is_empty() || sig.asyncness.is_some() || sig.abi.is_some() {
        return Err(syn::Error::new(
            sig.span(),
            "a #[kernel] takes no generics, no `async` and no explicit ABI",
        ));
    }
    if !matches!(sig.output, syn::ReturnType::Default) {
        return Err(syn::Error::new(sig.output.span(), "a #[kernel] returns nothing"));
    }

    let mut arg_types = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Typed(pat_type) => arg_types.push((*pat_type.ty).clone()),
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(r.span(), "a #[kernel] cannot take `self`"));
            }
        }
    }
    let arg_names: Vec<_> = (0..arg_types.len()).map(|i| format_ident!("arg{i}")).collect();

    let attrs = &func.attrs;
    let vis = &func.vis;
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let body = &func.block;
    let descriptor = format_ident!("{}", name.to_string().to_uppercase());
    let name_str = name.to_string();
    let descriptor_doc = format!("Launch descriptor of the kernel [`{name_str}`].");

    Ok(quote! {
        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #[allow(unsafe_op_in_unsafe_fn, clippy::missing_safety_doc)]
        #vis unsafe extern "ptx-kernel" fn #name(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #(#attrs)*
        #[allow(unsafe_op_in_unsafe_fn, clippy::missing_safety_doc, clippy::too_many_arguments)]
        #vis unsafe fn #name(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #descriptor_doc]
        #vis const #descriptor: ::kernels::KernelFn<(#(#arg_types,)*)> =
            ::kernels::KernelFn::new(#name_str, |(#(#arg_names,)*)| unsafe { #name(#(#arg_names),*) });
    })
}

/// Accepts exactly `launch_bounds(INT, INT)`.
fn check_launch_bounds(attr: &proc_macro2::TokenStream) -> syn::Result<()> {
    let call: syn::ExprCall = syn::parse2(attr.clone()).map_err(|_| {
        syn::Error::new(
            attr.span(),
            "expected #[kernel] or #[kernel(launch_bounds(MAX_THREADS, MIN_BLOCKS))]",
        )
    })?;
    let named = matches!(&*call.func, syn::Expr::Path(p) if p.path.is_ident("launch_bounds"));
    let literals = call.args.len() == 2
        && call.args.iter().all(|a| matches!(a, syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(_), .. })));
    if named && literals {
        Ok(())
    } else {
        Err(syn::Error::new(
            attr.span(),
            "expected launch_bounds(MAX_THREADS, MIN_BLOCKS) with two integer literals",
        ))
    }
}
