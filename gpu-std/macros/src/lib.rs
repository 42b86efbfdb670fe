//! The `#[kernel]` attribute of the device library `gpu-std` (re-exported as `gpu_std::kernel`).
//!
//! It plays the role of rust-cuda's `#[kernel]`: the annotated function becomes an
//! `extern "ptx-kernel"` entry point when the crate is compiled for `nvptx64-nvidia-cuda`, and a
//! plain Rust function when it is compiled for the host, where the CPU simulator runs it. On the
//! host it also gets a launch descriptor, a constant named after the function in upper case
//! (`saxpy` → `SAXPY`), that carries the PTX entry name and the argument tuple type, so the
//! host-side launcher is type-checked against the kernel's signature.
#![warn(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::punctuated::Punctuated;
use syn::visit_mut::VisitMut;
use syn::{Expr, FnArg, Ident, ItemFn, Pat, Token, Type, parse_macro_input, spanned::Spanned};

/// Declares a GPU kernel. See the crate documentation.
///
/// The function returns nothing and takes scalars, `Copy` structs, device slices and raw pointers:
///
/// * `x: &[T]` and `y: &mut [T]` are device slices: the function receives `gpu_std::Slice<T>` and
///   `gpu_std::SliceMut<T>` (pointer and `u32` length, bounds-checked indexing), and the host
///   launcher takes `&Buffer<T>` / `&mut Buffer<T>` for them;
/// * `gpu_std::Slice<T>` / `gpu_std::SliceMut<T>` written out are the same (name them `mut` to
///   index-assign);
/// * raw pointers (`*const T`, `*mut T`) are allowed, and then the function must be `unsafe fn`.
///   Without them it may be a safe `fn`.
///
/// `#[kernel(f32, f64)]` on a function with one type parameter (`fn foo<F: Float>(…)`) makes one
/// PTX entry per listed type, named `foo_f32`, `foo_f64`, with host descriptors `FOO_F32`,
/// `FOO_F64`; the generic function itself stays callable.
///
/// `launch_bounds(MAX_THREADS, MIN_BLOCKS)` in the list (alone, or after the types) is CUDA's
/// `__launch_bounds__`: the builder (`gpu-builder`, which reads it from the source) adds
/// `.maxntid MAX_THREADS, 1, 1` and `.minnctapersm MIN_BLOCKS` to each of the kernel's PTX
/// entries, so that ptxas keeps the registers low enough for `MIN_BLOCKS` blocks of `MAX_THREADS`
/// threads per SM. Launches with more threads fail. The builder reads the attribute line by line:
/// keep `#[kernel(…)]` on one line.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = match parse_options(attr.into()) {
        Ok(options) => options,
        Err(err) => return err.to_compile_error().into(),
    };
    let func = parse_macro_input!(item as ItemFn);
    match expand(func, &options) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

/// What `#[kernel(…)]` lists: the types of a generic kernel (in order).
struct Options {
    types: Vec<Ident>,
}

const USAGE: &str = "expected #[kernel], #[kernel(TYPES…)], #[kernel(launch_bounds(MAX_THREADS, MIN_BLOCKS))] \
                     or #[kernel(TYPES…, launch_bounds(MAX_THREADS, MIN_BLOCKS))]";

fn parse_options(attr: TokenStream2) -> syn::Result<Options> {
    let mut types = Vec::new();
    if attr.is_empty() {
        return Ok(Options { types });
    }
    let items = syn::parse::Parser::parse2(Punctuated::<Expr, Token![,]>::parse_terminated, attr.clone())
        .map_err(|_| syn::Error::new(attr.span(), USAGE))?;
    let mut bounds_seen = false;
    for item in &items {
        match item {
            Expr::Path(p) if p.qself.is_none() && !bounds_seen => match p.path.get_ident() {
                Some(ident) => types.push(ident.clone()),
                None => return Err(syn::Error::new(p.span(), "list each type by its name, e.g. f32")),
            },
            Expr::Call(call) if !bounds_seen => {
                check_launch_bounds(call)?;
                bounds_seen = true;
            }
            other => return Err(syn::Error::new(other.span(), USAGE)),
        }
    }
    Ok(Options { types })
}

/// Accepts exactly `launch_bounds(INT, INT)`.
fn check_launch_bounds(call: &syn::ExprCall) -> syn::Result<()> {
    let named = matches!(&*call.func, Expr::Path(p) if p.path.is_ident("launch_bounds"));
    let literals = call.args.len() == 2
        && call.args.iter().all(|a| matches!(a, Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(_), .. })));
    if named && literals {
        Ok(())
    } else {
        Err(syn::Error::new(
            call.span(),
            "expected launch_bounds(MAX_THREADS, MIN_BLOCKS) with two integer literals",
        ))
    }
}

/// How an argument reaches the PTX entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Passing {
    /// As itself: one `.param`.
    Value,
    /// A device slice of element type `T`, split into a `.param .u64 .ptr` (so that LLVM marks
    /// the pointer global, as for a raw pointer argument) and a `.param .u32` length.
    Slice { mutable: bool },
}

/// Rewrites `&[T]` to `::gpu_std::Slice<T>` and `&mut [T]` to `::gpu_std::SliceMut<T>` (the
/// binding made `mut`, for `y[i] = v`); refuses other references. Returns how each argument is
/// passed and whether any is a raw pointer.
fn rewrite_inputs(inputs: &mut Punctuated<FnArg, Token![,]>) -> syn::Result<(Vec<Passing>, bool)> {
    let mut raw_pointers = false;
    let mut passing = Vec::new();
    for input in inputs.iter_mut() {
        let pat_type = match input {
            FnArg::Typed(pat_type) => pat_type,
            FnArg::Receiver(r) => return Err(syn::Error::new(r.span(), "a #[kernel] cannot take `self`")),
        };
        passing.push(Passing::Value);
        match &*pat_type.ty {
            Type::Ptr(_) => raw_pointers = true,
            // Written out as `Slice<T>` / `SliceMut<T>`: passed the same way as `&[T]` / `&mut [T]`.
            Type::Path(p) if p.qself.is_none() => {
                let last = p.path.segments.last().map(|s| s.ident.to_string());
                match last.as_deref() {
                    Some("Slice") => *passing.last_mut().unwrap() = Passing::Slice { mutable: false },
                    Some("SliceMut") => *passing.last_mut().unwrap() = Passing::Slice { mutable: true },
                    _ => {}
                }
            }
            Type::Reference(r) => {
                let Type::Slice(slice) = &*r.elem else {
                    return Err(syn::Error::new(
                        r.span(),
                        "a #[kernel] takes slices (`&[T]`, `&mut [T]`), scalars, `Copy` structs or raw \
                         pointers; not other references",
                    ));
                };
                if let Some(lifetime) = &r.lifetime {
                    return Err(syn::Error::new(lifetime.span(), "a #[kernel] slice takes no lifetime"));
                }
                let elem = &slice.elem;
                *passing.last_mut().unwrap() = Passing::Slice { mutable: r.mutability.is_some() };
                if r.mutability.is_some() {
                    *pat_type.ty = syn::parse_quote!(::gpu_std::SliceMut<#elem>);
                    if let Pat::Ident(ident) = &mut *pat_type.pat {
                        ident.mutability = Some(Token![mut](Span::call_site()));
                    }
                } else {
                    *pat_type.ty = syn::parse_quote!(::gpu_std::Slice<#elem>);
                }
            }
            _ => {}
        }
    }
    Ok((passing, raw_pointers))
}

/// Replaces the type parameter `from` by the concrete type `to` in a signature's types.
struct Substitute<'a> {
    from: &'a Ident,
    to: &'a Ident,
}

impl VisitMut for Substitute<'_> {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::Path(p) = ty
            && p.qself.is_none()
            && p.path.is_ident(self.from)
        {
            let to = self.to;
            *ty = syn::parse_quote!(#to);
            return;
        }
        syn::visit_mut::visit_type_mut(self, ty);
    }
}

fn expand(mut func: ItemFn, options: &Options) -> syn::Result<TokenStream2> {
    let sig = &mut func.sig;
    if sig.asyncness.is_some() || sig.abi.is_some() {
        return Err(syn::Error::new(sig.span(), "a #[kernel] takes no `async` and no explicit ABI"));
    }
    if !matches!(sig.output, syn::ReturnType::Default) {
        return Err(syn::Error::new(sig.output.span(), "a #[kernel] returns nothing"));
    }
    let (passing, raw_pointers) = rewrite_inputs(&mut sig.inputs)?;
    if raw_pointers && sig.unsafety.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "a #[kernel] with raw-pointer arguments must be an `unsafe fn`: it dereferences them \
             (take `&[T]` / `&mut [T]` slices for a safe kernel)",
        ));
    }
    let type_params: Vec<&syn::TypeParam> = sig.generics.type_params().collect();
    let only_one_type = type_params.len() == 1 && sig.generics.params.len() == 1;
    match (options.types.is_empty(), sig.generics.params.is_empty()) {
        (true, true) => Ok(expand_kernel(&func, &passing, None)),
        (false, false) if only_one_type => {
            let param = type_params[0].ident.clone();
            Ok(expand_kernel(&func, &passing, Some((&param, &options.types))))
        }
        (true, false) => Err(syn::Error::new(
            sig.generics.span(),
            "a generic #[kernel] lists the types to compile it for: #[kernel(f32, f64)]",
        )),
        _ => Err(syn::Error::new(
            sig.span(),
            "#[kernel(TYPES…)] needs exactly one type parameter, e.g. `fn foo<F: Float>(…)`",
        )),
    }
}

/// The function itself (`#[inline(always)]`, so each entry gets its own optimised copy), and per
/// PTX entry — the function's name, or `name_TYPE` for each type of a generic kernel — an
/// `extern "ptx-kernel"` wrapper exported under the entry's name on the GPU and a launch
/// descriptor (the entry's name in upper case) on the host.
fn expand_kernel(func: &ItemFn, passing: &[Passing], generic: Option<(&Ident, &[Ident])>) -> TokenStream2 {
    let sig = &func.sig;
    let (attrs, vis, name, body) = (&func.attrs, &func.vis, &sig.ident, &func.block);
    let (unsafety, inputs, generics) = (&sig.unsafety, &sig.inputs, &sig.generics);
    let where_clause = &generics.where_clause;
    let mut out = quote! {
        #(#attrs)*
        #[inline(always)]
        #[allow(unsafe_op_in_unsafe_fn, unused_mut, clippy::missing_safety_doc, clippy::too_many_arguments)]
        #vis #unsafety fn #name #generics (#inputs) #where_clause #body
    };
    let arg_types: Vec<Type> = typed_inputs(sig).map(|p| (*p.ty).clone()).collect();
    let entries: Vec<(String, Vec<Type>, TokenStream2)> = match generic {
        None => vec![(name.to_string(), arg_types, quote!(#name))],
        Some((param, types)) => types
            .iter()
            .map(|ty| {
                let mut concrete = arg_types.clone();
                for t in &mut concrete {
                    Substitute { from: param, to: ty }.visit_type_mut(t);
                }
                (format!("{name}_{ty}"), concrete, quote!(#name::<#ty>))
            })
            .collect(),
    };
    for (entry, types, call) in &entries {
        out.extend(gpu_entry(entry, name, passing, types, call));
        out.extend(descriptor(vis, (entry, name), passing, types, call));
    }
    out
}

/// The PTX entry `entry`: an `extern "ptx-kernel"` function exported under that name that
/// rebuilds the device slices from their split parameters and calls the kernel.
fn gpu_entry(
    entry: &str,
    kernel: &Ident,
    passing: &[Passing],
    types: &[Type],
    call: &TokenStream2,
) -> TokenStream2 {
    let wrapper = format_ident!("__kernel_entry_{}", entry);
    let mut params = Vec::new();
    let mut args = Vec::new();
    for (i, (how, ty)) in passing.iter().zip(types).enumerate() {
        match how {
            Passing::Value => {
                let value = format_ident!("arg{i}");
                params.push(quote!(#value: #ty));
                args.push(quote!(#value));
            }
            Passing::Slice { mutable } => {
                let (ptr, len) = (format_ident!("arg{i}_ptr"), format_ident!("arg{i}_len"));
                let elem = slice_element(ty);
                let pointer = if *mutable { quote!(*mut #elem) } else { quote!(*const #elem) };
                params.push(quote!(#ptr: #pointer, #len: u32));
                args.push(quote!(<#ty>::from_raw_parts(#ptr, #len)));
            }
        }
    }
    let doc = format!("PTX entry `{entry}` of [`{kernel}`].");
    quote! {
        #[cfg(target_arch = "nvptx64")]
        #[doc = #doc]
        #[doc(hidden)]
        #[unsafe(export_name = #entry)]
        #[allow(non_snake_case, unused_unsafe, clippy::missing_safety_doc, clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn #wrapper(#(#params),*) {
            // SAFETY: the launcher passes each slice's pointer and length from one buffer.
            unsafe { #call(#(#args),*) }
        }
    }
}

/// `T` of the rewritten `::gpu_std::Slice<T>` / `::gpu_std::SliceMut<T>`.
fn slice_element(ty: &Type) -> Type {
    if let Type::Path(p) = ty
        && let Some(last) = p.path.segments.last()
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(syn::GenericArgument::Type(elem)) = args.args.first()
    {
        return elem.clone();
    }
    unreachable!("device slice types are rewritten to Slice<T> / SliceMut<T>")
}

fn typed_inputs(sig: &syn::Signature) -> impl Iterator<Item = &syn::PatType> {
    sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(p) => Some(p),
        FnArg::Receiver(_) => None,
    })
}

/// The host's launch descriptor (`entry_name` in upper case) for the PTX entry `entry_name` of
/// `kernel`: it runs `call` with the argument tuple in the simulator, and lists the addresses of
/// the entry's parameters for `cuLaunchKernel` (two per device slice: pointer and length).
fn descriptor(
    vis: &syn::Visibility,
    (entry_name, kernel): (&str, &Ident),
    passing: &[Passing],
    arg_types: &[Type],
    call: &TokenStream2,
) -> TokenStream2 {
    let constant = format_ident!("{}", entry_name.to_uppercase());
    let arg_names: Vec<Ident> = (0..arg_types.len()).map(|i| format_ident!("arg{i}")).collect();
    let params = passing.iter().enumerate().map(|(i, how)| {
        let index = syn::Index::from(i);
        match how {
            Passing::Value => quote!(params.push(&args.#index as *const _ as *mut ::core::ffi::c_void);),
            Passing::Slice { .. } => quote!(params.extend(args.#index.kernel_params());),
        }
    });
    let doc = format!("Launch descriptor of the PTX entry `{entry_name}` (kernel [`{kernel}`]).");
    quote! {
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #doc]
        #[allow(unused_unsafe)]
        // SAFETY: `params` lists one address per PTX parameter of the entry, in order.
        #vis const #constant: ::gpu_std::KernelFn<(#(#arg_types,)*)> = unsafe {
            ::gpu_std::KernelFn::new(
                #entry_name,
                |(#(#arg_names,)*)| unsafe { #call(#(#arg_names),*) },
                |args| {
                    let mut params = ::std::vec::Vec::new();
                    #(#params)*
                    params
                },
            )
        };
    }
}
